-- health reports carry the audit records the kernel lost while the daemon
-- watched (schema_version 3: health.drops_kernel_audit, the growth of the
-- kernel's audit `lost` counter, cumulative per daemon like the other drop
-- counters). 0 in reports written before this column and in those of older
-- daemons. `query health` shows it (drops_kernel_audit). The current
-- releases' layout (../legacy has 18.16's).
ALTER TABLE events ADD COLUMN IF NOT EXISTS drops_kernel_audit UInt64 DEFAULT 0;
