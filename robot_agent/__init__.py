"""Reward Studio robot agent: drives a robot (ManiSkill sim, replayed episode, or a real robot's host),
streams every step to the server over a WebSocket and shows the live success probability.

Needs numpy, Pillow and websockets; ManiSkill and pyspacemouse only for the robots and devices that use them.
No Django import anywhere in this package.
"""

__version__ = "0.1.0"
