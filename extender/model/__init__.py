"""The bottom layer: values every other layer passes around (no behaviour beyond their own, no I/O)."""
