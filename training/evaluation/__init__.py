"""Evaluating trained models: classifier metrics, a model's predictions on its validation split and the evaluation page, inference precision, and the runs page."""
