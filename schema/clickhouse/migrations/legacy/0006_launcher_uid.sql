-- launch records carry who launched the run (schema_version 2): the uid
-- of the process that sent them to the daemon's socket, set by the daemon
-- from the socket's peer credentials (SO_PEERCRED), never by the launcher.
-- -1 when not known: records written before this column, and records that
-- did not come through a daemon (`run --nats` publishing itself). `query
-- runs` shows it (launcher_uid). ClickHouse 18.16's layout (no ADD COLUMN
-- IF NOT EXISTS there: a column that exists already is taken as applied).
ALTER TABLE events ADD COLUMN launcher_uid Int64 DEFAULT -1;
