-- Destinations operators paused (queuebox destinations pause NAME), which
-- every relay reads about twice a second and holds the rows of; and the
-- circuits relays opened for destinations that kept failing, one row per
-- destination and replica, for operators to see (each replica decides its
-- own). Times are UTC, as in the outbox table.
CREATE TABLE {{q (obj "destinations") | qualify}} (
    name NVARCHAR(255) NOT NULL,
    paused BIT NOT NULL,
    reason NVARCHAR(MAX) NULL,
    changed_at DATETIME2 NOT NULL CONSTRAINT {{q (obj "df_dest_changed")}} DEFAULT SYSUTCDATETIME(),
    CONSTRAINT {{q (obj "destinations_pkey")}} PRIMARY KEY (name)
);
GO
CREATE TABLE {{q (obj "circuits") | qualify}} (
    destination NVARCHAR(255) NOT NULL,
    replica NVARCHAR(255) NOT NULL,
    opened_at DATETIME2 NOT NULL CONSTRAINT {{q (obj "df_circ_opened")}} DEFAULT SYSUTCDATETIME(),
    seen_at DATETIME2 NOT NULL CONSTRAINT {{q (obj "df_circ_seen")}} DEFAULT SYSUTCDATETIME(),
    last_error NVARCHAR(MAX) NULL,
    CONSTRAINT {{q (obj "circuits_pkey")}} PRIMARY KEY (destination, replica)
);
