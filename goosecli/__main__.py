from goosecli.main import app

app()
