"""The record formats on disk and their writers: the tidy row (schema, rows), run files (records,
store), inspect records, machine files, where files live (paths) and safe writing (output)."""
