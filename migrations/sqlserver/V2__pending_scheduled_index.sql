-- The claim reads due pending rows in scheduled_at order.
CREATE INDEX {{q (idx "pending_scheduled")}} ON {{t}} ({{c "state"}}, {{c "scheduled_at"}})
    WHERE {{c "state"}} = 'pending';
