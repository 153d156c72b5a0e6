"""The tests of the evaluation, `reinloop_eval`."""
