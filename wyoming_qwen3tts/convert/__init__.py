"""Hugging Face checkpoint -> OpenVINO IR, built with the opset API from numpy weights."""
