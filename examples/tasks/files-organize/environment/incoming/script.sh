script.sh line 0 452762
