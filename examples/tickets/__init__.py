"""The support-ticket example: two refund lines per ticket and an approval, on the public guard API."""
