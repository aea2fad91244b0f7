"""Streamlit pages, one per file, run by populora/ui/app.py (a package only so wheels ship them)."""
