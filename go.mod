module github.com/redislocker/lock

go 1.23
