-- wrk: POST the body in the file named by WRK_BODY with the content type in WRK_TYPE.
local f = assert(io.open(os.getenv("WRK_BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = os.getenv("WRK_TYPE") or "application/json"
