-- Destinations operators paused (queuebox destinations pause NAME), which
-- every relay reads about twice a second and holds the rows of; and the
-- circuits relays opened for destinations that kept failing, one row per
-- destination and replica, for operators to see (each replica decides its
-- own). Both are small: a row per destination ever paused, a row per open
-- circuit.
CREATE TABLE {{q (obj "destinations") | qualify}} (
    name VARCHAR(255) NOT NULL,
    paused BOOLEAN NOT NULL,
    reason TEXT NULL,
    changed_at TIMESTAMPTZ NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT {{q (obj "destinations_pkey")}} PRIMARY KEY (name)
);
CREATE TABLE {{q (obj "circuits") | qualify}} (
    destination VARCHAR(255) NOT NULL,
    replica VARCHAR(255) NOT NULL,
    opened_at TIMESTAMPTZ NOT NULL DEFAULT CURRENT_TIMESTAMP,
    seen_at TIMESTAMPTZ NOT NULL DEFAULT CURRENT_TIMESTAMP,
    last_error TEXT NULL,
    CONSTRAINT {{q (obj "circuits_pkey")}} PRIMARY KEY (destination, replica)
);
