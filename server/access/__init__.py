"""Access: tokens and keys, the caller's scope, rate limits, the audit line."""
