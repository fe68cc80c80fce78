"""The AWS KMS face of ``kms serve``, a room for each job:

- :mod:`.api`      the AWS KMS JSON 1.1 API itself (Encrypt, Decrypt, GenerateDataKey, DescribeKey)
- :mod:`.http`     the bounded HTTP/1.1 listener the API answers on, and its error answers
- :mod:`.sigv4`    who signed a request (AWS Signature Version 4), and the credentials file
- :mod:`.key_ids`  AWS-style key ids (``alias/``, ARNs) to the Python KMS's key ids
- :mod:`.tls`      the face's TLS identity (a CA made once, or your own files)

The blob format the face writes is :mod:`pyiceberg_crypto.kms.aws_face_blob` (the verifier reads it too).
"""

#: A map of the package: import its modules (nothing is re-exported here).
__all__: list[str] = []
