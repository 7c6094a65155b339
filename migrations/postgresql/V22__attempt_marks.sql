-- The attempt history says what the count of a row's tries does not:
-- probe marks the attempt that was its destination's circuit probe;
-- counted is false for a failure that the circuit breaker did not count
-- (a failed probe, a last try that failed while the destination was down:
-- the row waits, its attempt unchanged, and its next try has the same
-- number); replayed_by marks an operator's replay (outcome 'replayed'),
-- where the row's count started again, with who or what replayed it. Each
-- column has a constant default (or none), so adding it changes the
-- catalog only and rewrites no attempt.
ALTER TABLE {{q (obj "attempts") | qualify}}
    ADD COLUMN probe BOOLEAN NOT NULL DEFAULT FALSE,
    ADD COLUMN counted BOOLEAN NOT NULL DEFAULT TRUE,
    ADD COLUMN replayed_by VARCHAR(255) NULL;
