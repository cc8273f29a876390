"""Request bodies on the wire: `.npy` headers read without numpy, payload checks before a worker sees them, bounded image decoding on the web side."""
