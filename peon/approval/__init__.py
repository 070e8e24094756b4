"""The approval decision, pure: admission, validation, policy, shell analysis, rules, secret paths."""
