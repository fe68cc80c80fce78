"""The log4j 2 configuration the settings builders give the driver JVM by default (``quiet_logs``)."""
