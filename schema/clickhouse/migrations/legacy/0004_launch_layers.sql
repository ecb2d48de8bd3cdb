-- The fence's layers in launch records (docs/launcher.md, docs/events.md):
-- layers holds one "name=state" or "name=state:reason" string per layer,
-- e.g. "netns=off:scope_grants_network"; server_uid is the host uid the
-- server ran as (-1 in rows written before this column existed);
-- file_owner is "uid:gid" of the files it creates in a write scope.
--
-- ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS: a column that exists
-- already (a second collector migrating at once) is accepted by Migrate.
ALTER TABLE events ADD COLUMN layers Array(String);
ALTER TABLE events ADD COLUMN server_uid Int64 DEFAULT -1;
ALTER TABLE events ADD COLUMN file_owner String;
