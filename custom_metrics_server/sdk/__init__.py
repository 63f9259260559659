"""The backend contract: what a metrics backend implements and what it may rely on."""
