"""The labeling queue ranked by value: `ranking` (active learning, no Django), `services` (the queue's
writes and reads), `efficiency` (measured label efficiency), `retrain` (the train-to-target loop), `views`
and `urls`."""
