-- A replay keeps what the row told of its delivery: the relay records a
-- first try that succeeds in no attempt of its own (the row tells it:
-- delivered, its attempt, its updated_at), and a replay sets those columns
-- back. On the entry a replay of a delivered row leaves (outcome
-- 'replayed'), row_delivered_try is the try the row was delivered at
-- (attempt + 1) and row_delivered_at when its delivery was written (its
-- updated_at, the database's clock); NULL on every other entry. Nullable
-- without a default, so adding them changes the catalog only.
ALTER TABLE {{q (obj "attempts") | qualify}}
    ADD COLUMN row_delivered_try INTEGER NULL,
    ADD COLUMN row_delivered_at TIMESTAMPTZ NULL;
