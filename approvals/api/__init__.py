"""The agents' JSON API under /api/v1/ (endpoints.py, schemas.py) and the long-polls
that wait in front of Django holding no thread (longpoll.py); errors.py makes every
error under /api/ a problem document, Django's own 404 and 405 included."""
