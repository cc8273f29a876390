"""Running training jobs: `launch` (in this process or under torchrun), `rank_main` (one rank of a
data-parallel job), `reporter` (the job row's Reporter), `limits` (what a job may ask of this machine),
`model_paths` and `errors` (why a job failed, as users see it); lost broker messages are the job kit's
(common/jobs/lost_messages.py). The job rows' writes are in training/services.py, its reads in training/selectors.py."""
