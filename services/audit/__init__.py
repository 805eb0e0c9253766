"""Audit: evidence exports, reconciliation reports and read-log rows for auditors."""
