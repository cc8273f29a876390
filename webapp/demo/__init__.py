"""The demo: the run command's PickCube project (`setup_demo`) and the demo reward model (`demo`)."""
