"""What a researcher does with the simulator: runs, sweeps, deployment searches, replays, comparisons, benchmarks."""
