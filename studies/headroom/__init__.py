"""The headroom a fix can buy and the races a fix can cause, measured (gallery_and_draft)."""
