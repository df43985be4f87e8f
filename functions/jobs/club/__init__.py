"""The club scheduler of seed 002: seven 30-minute jobs, the email-intake retry and the Discord event contract.

Jobs save their changes and the Discord events those changes imply in one fenced
transaction (the events go to an outbox row), then send the signed events to the
notification queue. Only the Discord worker (`handlers.discord`) talks to Discord.
"""
