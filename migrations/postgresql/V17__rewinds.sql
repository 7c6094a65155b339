-- A counter that every replay moves. Relays bound their claims by what they
-- know (how far back the schedule walk looks, and per group of keys a
-- sequence below which no row is pending or processing), so that a long
-- transaction elsewhere in the database, which keeps every row version the
-- relay leaves behind, does not make each claim walk them all. A replay is
-- the one thing that can put a row back below those bounds; a claim that
-- finds the counter moved since its bounds were made ignores them.
CREATE SEQUENCE {{q (obj "replays") | qualify}};
