-- launch records carry who launched the run (schema_version 2): the uid
-- of the process that sent them to the daemon's socket, set by the daemon
-- from the socket's peer credentials (SO_PEERCRED), never by the launcher.
-- -1 when not known: records written before this column, and records that
-- did not come through a daemon (`run --nats` publishing itself). `query
-- runs` shows it (launcher_uid). The current releases' layout (../legacy
-- has 18.16's).
ALTER TABLE events ADD COLUMN IF NOT EXISTS launcher_uid Int64 DEFAULT -1;
