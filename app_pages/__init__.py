"""Pages of the Streamlit web app (``streamlit run app.py``)."""
