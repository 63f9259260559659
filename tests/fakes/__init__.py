"""Test doubles that are real servers (a fake kube-apiserver), shared by every test package."""
