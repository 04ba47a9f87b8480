build/obj/src/daemon/main.o: src/daemon/main.c include/daemon/exitcodes.h
include/daemon/exitcodes.h:
