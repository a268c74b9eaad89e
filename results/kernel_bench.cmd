oscar-bench --reps 30
