"""The deployment pages: deploying a model (`deploy`), managing a deployment (`manage`: switch, settings, pause,
delete, history) and their forms (`forms`)."""
