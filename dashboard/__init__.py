"""The dashboard's page parts, one module a panel; app.py holds the page flow (see README's layout table).

These modules import streamlit, so they live beside app.py, never in fitcore/.
"""
