oscar-bench --batch 1 8 32 --ctx 32768 131072 --reps 30
