"""Model compression (the survey's section VI): distillation, pruning, quantisation."""
