"""Live teleop: sessions of robot agents streaming to the server, scored live and labeled by operators."""
