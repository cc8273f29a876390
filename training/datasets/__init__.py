"""Dataset exports in RLinf's formats, as plain functions over plain data (no Django).

Frames are referenced by `FrameRef` and loaded through a callable only once selected, so a snapshot of a
large project reads just the frames that end up in it.
"""
