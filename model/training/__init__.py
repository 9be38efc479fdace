"""Training: each stage's settings, the ICT, pre-training and fine-tuning trainers with what they alone use, and the loop plumbing they share."""
