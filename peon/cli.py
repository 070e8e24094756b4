def main():
    raise SystemExit("peon: command line not built yet")
