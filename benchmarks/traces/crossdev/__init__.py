"""Cross-device validation of trace replay on public paired data (benchmarks/traces/cross_device.py).

One module per data set (:mod:`.tracelens`, :mod:`.vidur`, :mod:`.neusight`), shared metrics,
data location and profile provenance in :mod:`.common`. None of these data sets calibrated a
device profile (:func:`.common.provenance` checks the profiles' calibration records for them).
"""
