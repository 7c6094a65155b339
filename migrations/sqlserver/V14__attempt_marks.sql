-- The attempt history says what the count of a row's tries does not:
-- probe marks the attempt that was its destination's circuit probe;
-- counted is 0 for a failure that the circuit breaker did not count (a
-- failed probe, a last try that failed while the destination was down: the
-- row waits, its attempt unchanged, and its next try has the same number);
-- replayed_by marks an operator's replay (outcome 'replayed'), where the
-- row's count started again, with who or what replayed it.
ALTER TABLE {{q (obj "attempts") | qualify}} ADD
    probe BIT NOT NULL CONSTRAINT {{q (obj "df_attempts_probe")}} DEFAULT 0,
    counted BIT NOT NULL CONSTRAINT {{q (obj "df_attempts_counted")}} DEFAULT 1,
    replayed_by NVARCHAR(255) NULL;
