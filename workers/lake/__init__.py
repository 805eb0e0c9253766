"""The lake: the keyless lake-writer, the purge and the Delta table layout."""
