"""Files ladd writes and reads: atomic writes, checksummed weights, bounded records of shared folders."""
