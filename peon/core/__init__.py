"""What every process of a session may import: the tool contract, risks, errors, cancellation,
framing, the client<->supervisor wire, the configuration view, paths, skills, jobs, text and output."""
