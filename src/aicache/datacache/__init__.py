"""The real data cache: on-disk block store, fsspec filesystem, FUSE mount, live Chiron."""
