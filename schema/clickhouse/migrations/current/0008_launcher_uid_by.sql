-- launch records say who asserts their launcher_uid (schema_version 3):
-- 'daemon' (read from its socket's peer credentials, SO_PEERCRED) or
-- 'launcher' (a `run --nats` publishing itself states its own uid). ''
-- in records written before this column: their launcher_uid, when known,
-- is the daemon's (schema_version 2 had no other source). `query runs`
-- shows it (launcher_uid_by). The current releases' layout (../legacy has
-- 18.16's).
ALTER TABLE events ADD COLUMN IF NOT EXISTS launcher_uid_by LowCardinality(String) DEFAULT '';
