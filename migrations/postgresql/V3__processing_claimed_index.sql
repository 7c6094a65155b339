-- Lease renewal and the release of expired leases read processing rows only.
CREATE INDEX {{q (idx "processing_claimed")}} ON {{t}} ({{c "claimed_at"}})
    WHERE {{c "state"}} = 'processing';
