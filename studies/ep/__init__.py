"""Expert parallelism on real ranks (real_ranks: two GPUs, or gloo ranks with --smoke), launched by
torchrun (torchrun_launch), and the EP-2 prediction checked against the recorded runs on CPU
(validate_recorded). The run files land in data/runs/, where the kit reads them."""
