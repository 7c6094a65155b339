-- A counter of rewinds: every time rows go back to pending behind what the
-- relays have looked at. Relays bound their claims by what they know (how
-- far back the walk in schedule order looks, and per group of keys a
-- sequence below which no row is pending or processing), so that a long
-- transaction elsewhere in the database, which keeps every row version the
-- relays leave behind, does not make each claim walk them all. A replay, a
-- lease that expired and the release of a stopping replica's rows can put
-- rows back below those bounds; each moves this counter, and a claim that
-- finds it moved since its bounds were made sets them aside.
CREATE SEQUENCE {{q (obj "rewinds") | qualify}};
