"""`ascendfactory-cli performance`: every finished run under a folder against a baseline table.

runs.py      find the runs under a folder and read each one's figures (plan-independent parsers, the run's
             exp-config.yaml and .af/summary.json): throughput by its framework's formula, step time,
             TFLOP/s and MFU per device, peak memory, the predicted step time the plan recorded
baseline.py  the baseline YAML (`*_performance_baseline.yaml`): entries by model, experiment, sequence
             length and device; matching and the within / above / below verdicts
workbook.py  the .xlsx the product writes (`<Framework>_train_performance_benchmark_<version>_<time>.xlsx`)
report.py    runs + baseline -> rows for the console table, the JSON and the workbook
"""
