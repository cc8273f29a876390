"""LeRobot datasets, both ways: `format` (reading v2.x and v3.0 datasets), `importer` (datasets and video
episodes as import-job sources, through labeling/imports), `writer` and `export` (a project as a LeRobot
v3.0 dataset with its labels) and `views` (the project page's export)."""
