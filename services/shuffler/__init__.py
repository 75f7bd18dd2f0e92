"""The shuffler service: enrollment, anonymous submissions, uniform permutation, release."""
