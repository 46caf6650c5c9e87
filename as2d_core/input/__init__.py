"""Where audio comes from: files and bytes, the windows of a long file, live streams."""
